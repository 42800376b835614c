"""The programmes: the list (the portal's home page) and a new programme, a programme's page
and its overview, and the forms of its page: settings, API keys, fees, the webhook secret and
the profiles. Revoking a key and replacing the webhook secret cannot be undone: each asks first
on a page of its own (`actions.confirm_page`)."""

from __future__ import annotations

from typing import Any

from fastapi import Request, Response
from fastapi.responses import RedirectResponse

from multibank.api.routing import container_of
from multibank.api.versions import VERSIONS
from multibank.cards import operator as card_ops
from multibank.kernel.validation import parse_id
from multibank.payments.models import Payment
from multibank.portal import overview, payment_detail
from multibank.portal.web.actions import Flash, act, confirm_page, confirmed, programme_form, show
from multibank.portal.web.common import (
    PAGE,
    Offset,
    db_of,
    not_found,
    open_programme,
    pager,
    portal_router,
    posted_form,
    posted_programme,
    programme_ctx,
    signed_in,
    to_login,
)
from multibank.portal.web.forms import WHOLE, Refused, major_amount, webhook_url_ascii
from multibank.programmes import repository, service
from multibank.programmes.models import Programme
from multibank.programmes.schemas import ProfileUpdate, ProgrammeCreate, ProgrammeSettingsUpdate

pages = portal_router()


@pages.get("/")
async def home(request: Request, offset: Offset = 0) -> Response:
    signed = await signed_in(request)
    if signed is None:
        return to_login()
    # Paged like every other list: a server holding thousands of programmes (a test suite's
    # sandbox) answers this page as fast as one holding three.
    count, page = await repository.page_of_programmes(db_of(request), offset, PAGE)
    listed = [
        {"programmeId": str(p.id), "name": p.name, "mode": p.mode, "currencies": currencies}
        for p, currencies in page
    ]
    return await show(
        request,
        signed,
        "programmes.html",
        title="Programmes",
        programmes=listed,
        pager=pager(request, offset, PAGE, count),
        versions=VERSIONS,
    )


@pages.post("/programmes")
async def programme_create(request: Request) -> Response:
    signed, form, refused = await posted_form(request)
    if refused is not None or signed is None:
        return refused or to_login()
    container = container_of(request)
    made: list[int] = []

    async def work() -> Flash:
        fields: dict[str, Any] = {"name": form.get("name", "")}
        if "mode" in form:
            fields["mode"] = form["mode"]
        if "currencies" in form:
            fields["currencies"] = [c.strip() for c in form["currencies"].split(",") if c.strip()]
        # The API's model: a mode other than sandbox or live is refused, not made a sandbox.
        data = ProgrammeCreate.model_validate(fields)
        programme, key = await service.create_programme(
            db_of(request), container.clock, data, container.settings.webhooks_allow_private
        )
        made.append(programme.id)
        return Flash(f"Programme {programme.name} created.", secret=key, secret_id="new-key")

    return await act(request, signed, "/portal/", work, to=lambda: f"/portal/programmes/{made[0]}")


@pages.get("/programmes/{programme_id}")
async def programme_page(request: Request, programme_id: str) -> Response:
    opened = await open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    db = db_of(request)
    keys = await service.list_api_keys(db, programme)
    return await show(
        request,
        signed,
        "programme.html",
        title=programme.name,
        programme=programme,
        settings=service.settings_of(programme),
        keys=keys,
        active_keys=sum(1 for k in keys if not k.revokedTimestamp),
        profiles=await service.list_profiles(db, programme),
        fee_types=await service.list_fee_types(db, programme),
        card_profiles=await card_ops.card_profiles(db, programme),
        card_fees=(await service.card_fees_of(db, programme)).model_dump(),
        now=programme_ctx(request, programme).now,
        exemption_currency=await _exemption_currency(request, programme),
    )


@pages.get("/programmes/{programme_id}/overview")
async def overview_page(request: Request, programme_id: str) -> Response:
    """The programme's landing page: counts, balances, money moved, payments waiting."""
    opened = await open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    now = programme_ctx(request, programme).now
    db = db_of(request)
    view = await overview.read(db, programme.id, now)
    base = f"/portal/programmes/{programme.id}"
    # The waiting wire transfers' source accounts by name (one query for the rows shown).
    sources: dict[int, Any] = {}
    if view.waiting:
        ids = [p.id for p in view.waiting]
        for row in (await db.execute(payment_detail.with_parties(Payment.id.in_(ids)))).all():
            sources[row[0].id] = payment_detail.listed(base, row)["source"]
    return await show(
        request,
        signed,
        "overview.html",
        title=f"{programme.name} overview",
        programme=programme,
        now=now,
        view=view,
        sources=sources,
        day_chart=overview.day_chart,
        count_chart=overview.count_chart,
        day_name=overview.day_name,
    )


# The forms of the programme's page.

BOOLEAN_SETTINGS = {"stepUpRequired", "sendsScaRequired", "owtScaRequired"}
# Settings that are amounts: the form takes them as every money field does, in major units.
MONEY_SETTINGS = {
    "lowValueExemptionMaxAmount": "Exempt amount per payment",
    "lowValueExemptionMaxTotal": "Exempt total since the last SCA",
}


async def _exemption_currency(request: Request, programme: Programme) -> str:
    """The currency the exemption amounts are typed and shown in: the programme's first. The
    setting itself is a count of minor units, the same for every currency (the API's)."""
    currencies = (await service.read(db_of(request), programme)).currencies
    return currencies[0] if currencies else "EUR"


def _setting_value(name: str, raw: str) -> Any:
    """A settings field as the API's JSON would carry it; what is neither is passed on as text,
    for the model to refuse."""
    if raw == "" and name in service.NULLABLE_SETTINGS:
        return None
    if name in BOOLEAN_SETTINGS and raw in ("true", "false"):
        return raw == "true"
    if WHOLE.fullmatch(raw.strip()):
        return int(raw.strip())
    return raw


@programme_form(pages, "settings")
async def settings_save(request: Request, form: dict[str, str], programme: Programme) -> Flash:
    fields = ProgrammeSettingsUpdate.model_fields
    values = {k: _setting_value(k, v) for k, v in form.items() if k in fields}
    currency = await _exemption_currency(request, programme)
    for name, what in MONEY_SETTINGS.items():
        if name in form:  # typed in major units of the currency the form names (decision 0071)
            try:
                values[name] = major_amount(form[name], currency, what)
            except Refused as exc:
                raise Refused(str(exc), f"invalid: {name}") from exc
    if "webhookUrl" in form:
        values["webhookUrl"] = webhook_url_ascii(form["webhookUrl"])
    data = ProgrammeSettingsUpdate(**values)
    allow_private = container_of(request).settings.webhooks_allow_private
    await service.update_settings(db_of(request), programme, data, allow_private)
    return Flash("Settings saved.")


@programme_form(pages, "api_keys")
async def key_create(request: Request, form: dict[str, str], programme: Programme) -> Flash:
    clock = container_of(request).clock
    created = await service.create_api_key(
        db_of(request), clock, programme, form.get("label") or None
    )
    return Flash("API key created.", secret=created.apiKey, secret_id="new-key")


@programme_form(pages, "movement_fee")
async def movement_fee(request: Request, form: dict[str, str], programme: Programme) -> Flash:
    currency = form.get("currency", "")
    amount = major_amount(form.get("amount"), currency, "The fee")
    await service.set_movement_fee(
        db_of(request), programme, form.get("kind", ""), currency, amount
    )
    return Flash("Fee set.")


@programme_form(pages, "fee_type")
async def fee_type(request: Request, form: dict[str, str], programme: Programme) -> Flash:
    name = form.get("name", "")
    await service.set_fee_type_amount(
        db_of(request),
        container_of(request).clock,
        programme,
        name,
        form.get("group", "") or "DEFAULT",
        form.get("currency", ""),
        major_amount(form.get("amount"), form.get("currency", ""), "The amount"),
    )
    return Flash(f"Fee type {name} saved.")


# What cannot be undone: asked first on a page of its own.


@pages.get("/programmes/{programme_id}/webhook_secret")
async def webhook_secret_confirm(request: Request, programme_id: str) -> Response:
    opened = await open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    home = f"/portal/programmes/{programme.id}"
    text = (
        "A new webhook signing secret replaces the current one at once: events are signed "
        "with the new one only, and a receiver still checking with the old one refuses them."
    )
    return confirm_page(
        signed, programme, text, f"{home}/webhook_secret", "Make a new webhook secret", home
    )


@pages.post("/programmes/{programme_id}/webhook_secret")
async def webhook_secret(request: Request, programme_id: str) -> Response:
    opened = await posted_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, form, programme = opened
    home = f"/portal/programmes/{programme.id}"
    if not confirmed(form):
        return RedirectResponse(f"{home}/webhook_secret", status_code=303)

    async def work() -> Flash:
        secret = await service.rotate_webhook_secret(db_of(request), programme)
        return Flash("Webhook secret replaced.", secret=secret, secret_id="new-secret")

    return await act(request, signed, home, work)


@pages.get("/programmes/{programme_id}/api_keys/{key_id}/revoke")
async def key_revoke_confirm(request: Request, programme_id: str, key_id: str) -> Response:
    opened = await open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    keys = await service.list_api_keys(db_of(request), programme)
    key = next((k for k in keys if k.id == key_id and not k.revokedTimestamp), None)
    if key is None:
        return not_found("active API key")
    home = f"/portal/programmes/{programme.id}"
    text = f"Revoke the API key {key.prefix}… ({key.label or 'no label'})? It cannot be undone."
    if sum(1 for k in keys if not k.revokedTimestamp) == 1:
        text += (
            " It is the programme's last active key: every client of the programme stops "
            "working until a new key is created."
        )
    return confirm_page(
        signed, programme, text, f"{home}/api_keys/{key.id}/revoke", "Revoke the key", home
    )


@pages.post("/programmes/{programme_id}/api_keys/{key_id}/revoke")
async def key_revoke(request: Request, programme_id: str, key_id: str) -> Response:
    opened = await posted_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, form, programme = opened
    number = parse_id(key_id)
    if number is None:
        return not_found("API key")
    home = f"/portal/programmes/{programme.id}"
    if not confirmed(form):
        return RedirectResponse(f"{home}/api_keys/{number}/revoke", status_code=303)
    clock = container_of(request).clock

    async def work() -> Flash:
        await service.revoke_api_key(db_of(request), clock, programme, number)
        return Flash("API key revoked.")

    return await act(request, signed, home, work)


@pages.post("/programmes/{programme_id}/profiles/{profile_id}")
async def profile_update(request: Request, programme_id: str, profile_id: str) -> Response:
    opened = await posted_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, form, programme = opened
    number = parse_id(profile_id)
    if number is None:
        return not_found("profile")
    db = db_of(request)

    async def work() -> Flash:
        active = form.get("active")
        if active not in (None, "true", "false"):
            raise Refused("Active must be yes or no.")
        currencies = form.get("currencies")
        data = ProfileUpdate(
            currencies=None
            if currencies is None
            else [c.strip() for c in currencies.split(",") if c.strip()],
            active=None if active is None else active == "true",
        )
        # A profile's currencies are the programme's (its currencies are its profiles'): a
        # currency no profile has yet is added to the programme only when the operator says so.
        known = set((await service.read(db, programme)).currencies)
        new = sorted(set(data.currencies or ()) - known)
        if new and form.get("addCurrencies") != "yes":
            raise Refused(
                f"{', '.join(new)} is not a currency of this programme: tick "
                "“add new currencies to the programme” to add it."
            )
        await service.update_profile(db, programme, number, data)
        added = f" The programme now also has {', '.join(new)}." if new else ""
        return Flash(f"Profile saved.{added}")

    return await act(request, signed, f"/portal/programmes/{programme.id}", work)
