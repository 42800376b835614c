"""The server's home page at `/` (issue 14, "the first five minutes"): where everything is, the
`default` sandbox programme's API key, and a quick start with curl from sign-up to a funded
account and its statement, written for this very server.

The page is one HTML document with inline CSS and nothing else (no scripts, no fonts, no CDN),
readable on a phone. Everything it interpolates is escaped. The quick start is built from `STEPS`
and written with the request's own base URL and the real key, so it works as pasted;
`tests/api/test_landing.py` replays it from the page's text.
"""

from __future__ import annotations

import html
import json
import logging
import re
import secrets
import shlex
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.api.deps import AppContainer, Db
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.versions import VERSIONS
from multibank.identities.samples import corporate_signup
from multibank.programmes import repository as programmes_repo
from multibank.programmes import service as programmes

log = logging.getLogger("multibank.landing")

router = UnitOfWorkRouter(include_in_schema=False)

DEFAULT_PROGRAMME = "default"  # the programme `multibank serve` creates (cli/common.py)
CODE = "123456"  # every one-time code of a sandbox programme
PASSWORD = "Sandbox-Pa55"  # meets the password rules; no `!`, which shells expand
DEPOSIT = {"currency": "EUR", "amount": 10000}
# The base URL the quick start uses when the request's own cannot be written into a shell
# command as it is (a Host header with anything but a host name, an address and a port).
FALLBACK_BASE = "http://localhost:8000"
_SAFE_BASE = re.compile(
    r"^https?://(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~-]+)*$"
)
# What the page allows the browser: its own inline style, nothing else.
SECURITY_HEADERS = {
    # The page shows an API key: no cache keeps it.
    "cache-control": "no-store",
    "content-security-policy": (
        "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "referrer-policy": "no-referrer",
}


@dataclass(frozen=True)
class Sandbox:
    """The `default` sandbox programme as the page shows it."""

    programme_id: str
    api_key: str | None  # None: every key of it is revoked
    profiles: dict[str, str]
    step_up_required: bool


@dataclass(frozen=True)
class Step:
    """One command of the quick start. `path`, `headers` may name shell variables (`$CORP`)
    that earlier steps `set` from their answers: (variable, dotted path in the JSON answer)."""

    title: str
    method: str
    path: str
    headers: tuple[str, ...]
    expect: int
    body: dict[str, Any] | None = None
    sets: tuple[tuple[str, str], ...] = ()
    only_if: str = ""  # a condition on the previous answer, said in words
    when: str = ""  # the same condition as a jq filter, for the script that captures ids
    note: str = ""


# Over 80 lines: the quick start's steps as data, one entry a step; no logic.
def steps(sandbox: Sandbox, api_key: str, email: str) -> list[Step]:
    """The quick start: sign-up to a funded account and its statement, on 3.29.1 (`/multi`)."""
    key = f"api-key: {api_key}"
    sim = f"programme-key: {api_key}"
    bearer = "Authorization: Bearer $TOKEN"
    return [
        Step(
            "Sign up a corporate",
            "POST",
            "/multi/corporates",
            (key,),
            200,
            body=corporate_signup(sandbox.profiles["corporate"], email, tag="quick-start"),
            sets=(("CORP", "id.id"), ("USER_ID", "rootUser.id.id")),
            note="The e-mail address is a new one each time this page loads.",
        ),
        Step(
            "Send the root user's e-mail verification code",
            "POST",
            "/multi/corporates/verification/email/send",
            (key,),
            204,
            body={"email": email},
        ),
        Step(
            f"Verify the e-mail address with the sandbox code {CODE}",
            "POST",
            "/multi/corporates/verification/email/verify",
            (key,),
            204,
            body={"email": email, "verificationCode": CODE},
        ),
        Step(
            "Create the root user's password: this also logs in",
            "POST",
            "/multi/passwords/$USER_ID/create",
            (key,),
            200,
            body={"password": {"value": PASSWORD}},
            sets=(("TOKEN", "token"),),
        ),
        Step(
            "Approve the corporate's KYB with the simulator",
            "POST",
            "/simulate/api/corporates/$CORP/verify",
            (sim,),
            204,
        ),
        Step(
            "Open a managed account in EUR",
            "POST",
            "/multi/managed_accounts",
            (key, bearer),
            200,
            body={
                "profileId": sandbox.profiles["corporateManagedAccount"],
                "friendlyName": "Main",
                "currency": "EUR",
            },
            sets=(("ACCOUNT", "id"),),
        ),
        Step(
            "Upgrade the account to an IBAN",
            "POST",
            "/multi/managed_accounts/$ACCOUNT/iban",
            (key, bearer),
            200,
            note="Money from outside reaches only an account with an IBAN. The answer's state "
            "is PENDING_ALLOCATION (then run step 8) or ALLOCATED (then skip it).",
        ),
        Step(
            "Allocate the IBAN now with the simulator",
            "POST",
            "/simulate/api/managed_accounts/$ACCOUNT/iban/allocate",
            (sim,),
            204,
            only_if="the last answer's state was PENDING_ALLOCATION",
            when='.state == "PENDING_ALLOCATION"',
            note="A 409 IBAN_NOT_PENDING means it is allocated already: go on.",
        ),
        Step(
            "Deposit 100.00 EUR with the simulator",
            "POST",
            "/simulate/api/accounts/$ACCOUNT/deposit",
            (sim,),
            200,
            body={"depositAmount": DEPOSIT},
            note='Amounts are in minor units. The answer is {"code": "COMPLETED"}.',
        ),
        Step(
            "Read the account's statement",
            "GET",
            "/multi/managed_accounts/$ACCOUNT/statement",
            (key, bearer),
            200,
            note="Add -H 'accept: text/csv' or -H 'accept: application/pdf' (with -o) for CSV "
            "or PDF.",
        ),
        Step(
            "Later: log in again",
            "POST",
            "/multi/login_with_password",
            (key,),
            200,
            body={"email": email, "password": {"value": PASSWORD}},
            sets=(("TOKEN", "token"),),
            note="A token lasts 5 minutes from its last use and 12 hours in all.",
        ),
    ]


def _shell_word(text: str) -> str:
    """`text` as one shell word: in double quotes when it names a variable (`$CORP`), which
    only the page's own paths and headers do, quoted as a literal otherwise."""
    if "$" in text:
        if any(c in text for c in '"`\\!'):
            raise ValueError(f"cannot double-quote {text!r}")
        return f'"{text}"'
    return shlex.quote(text)


def curl(base: str, step: Step, status_line: bool = True) -> str:
    """The command of `step` against `base`, one option per line: it prints the answer and,
    with `status_line`, its HTTP status; without, a refusal is said by curl and fails."""
    first = ["curl", "-sS"]
    first += ["-w", shlex.quote(r"\n%{http_code}\n")] if status_line else ["--fail-with-body"]
    if step.method != "GET":
        first += ["-X", step.method]
    first.append(_shell_word(base + step.path))
    lines = [" ".join(first)]
    headers = list(step.headers)
    if step.body is not None:
        headers.append("content-type: application/json")
    lines += [f"-H {_shell_word(h)}" for h in headers]
    if step.body is not None:
        lines.append(f"-d {shlex.quote(json.dumps(step.body))}")
    return " \\\n  ".join(lines)


def script_text(base: str, all_steps: list[Step]) -> str:
    """Every step as one shell script that sets each variable from the answer with jq, so
    nothing is copied by hand. Pasted whole into bash or zsh: each answer is printed (through
    `jq .`), a refused request says its status and body (`--fail-with-body`), and the variables
    stay set in the shell for what comes next."""
    out = []
    for number, step in enumerate(all_steps, start=1):
        capture = f"ANSWER=$({curl(base, step, status_line=False)})"
        out.append(f"# {number}. {step.title}")
        if step.when:
            out.append(f'if echo "$ANSWER" | jq -e {shlex.quote(step.when)} >/dev/null; then')
            out.append("  " + capture.replace("\n", "\n  "))
            out.append('  echo "$ANSWER" | jq .')
            out.append("fi")
        else:
            out.append(capture)
            out.append('echo "$ANSWER" | jq .')
        for name, path in step.sets:
            out.append(f'{name}=$(echo "$ANSWER" | jq -r .{path})')
    return "\n".join(out)


def step_text(base: str, number: int, step: Step) -> str:
    """One step as shell text: comments (what it does, what it answers, what to set) and the
    command. Pasted whole, the comments do nothing."""
    out = [f"# {number}. {step.title} (answers {step.expect})"]
    if step.only_if:
        out.append(f"# Only if {step.only_if}:")
    out.append(curl(base, step))
    if step.note:
        out.append(f"# {step.note}")
    if step.sets:
        names = " ".join(f"{name}=<{path}>" for name, path in step.sets)
        out.append(f"# Then set from the answer: {names}")
    return "\n".join(out)


def request_base(request: Request) -> str:
    """The base URL the request reached (scheme, host, port, root path), if a shell can take
    it as it is; FALLBACK_BASE otherwise."""
    base = str(request.base_url).rstrip("/")
    return base if _SAFE_BASE.match(base) else FALLBACK_BASE


async def default_sandbox(db: AsyncSession) -> Sandbox | None:
    """The `default` programme, when it exists and is a sandbox."""
    programme = await programmes_repo.get_programme_by_name(db, DEFAULT_PROGRAMME)
    if programme is None or programme.mode != "sandbox":
        return None
    described = await programmes.describe(db, programme)
    return Sandbox(
        programme_id=described.programmeId,
        api_key=described.apiKey,
        profiles=described.profiles.model_dump(),
        step_up_required=programme.step_up_required,
    )


STYLE = (
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:46em;"
    "margin:0 auto;padding:1em;line-height:1.5;color:#1d1d1f;background:#fff}"
    "h1{font-size:1.6em;margin:.4em 0}h2{font-size:1.2em;margin-top:1.6em;"
    "border-bottom:1px solid #ddd}h3{font-size:1em;margin:1.2em 0 .3em}"
    "code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.88em}"
    "code{background:#f2f2f4;padding:0 .2em;border-radius:3px;overflow-wrap:anywhere}"
    "pre{background:#f2f2f4;padding:.7em;border-radius:4px;white-space:pre-wrap;"
    "overflow-wrap:anywhere}pre code{background:none;padding:0}"
    "ul{padding-left:1.2em}li{margin:.3em 0}a{color:#0645ad}"
    ".key{font-size:1em;user-select:all}"
)


def _link(root: str, path: str, text: str | None = None) -> str:
    href = html.escape(root + path)
    return f'<a href="{href}">{html.escape(text if text is not None else path)}</a>'


def _code(text: str) -> str:
    return f"<code>{html.escape(text)}</code>"


# Over 80 lines: the page's HTML, written out part by part in page order.
def render(
    base: str, root: str, sandbox: Sandbox | None, live: bool, email: str, db_ok: bool = True
) -> str:
    """The page. `base`: the URL the quick start's commands use; `root`: the path prefix of the
    page's links (the ASGI root path, usually empty)."""
    versions = "".join(
        f"<li><strong>{html.escape(version)}</strong>{f' ({html.escape(note)})' if note else ''}: "
        f"{_code(b)}<br>docs: {_link(root, b + '/docs')} (Swagger UI) · "
        f"{_link(root, b + '/redoc', 'ReDoc')} · "
        f"{_link(root, b + '/openapi.json', 'openapi.json')}</li>"
        for b, version, note in VERSIONS
    )
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>multibank</title>",
        f"<style>{STYLE}</style>",
        "</head><body>",
        "<h1>multibank</h1>",
        "<p>A self-hosted server of the Multi Product Banking Service interface, versions "
        "3.29.1 and 3.1.0 side by side. Every page linked here is served by this server "
        "itself.</p>",
        "<h2>Interface versions</h2>",
        f"<ul>{versions}</ul>",
        "<p>Payments (transfers, sends, outgoing wire transfers) are on 3.29.1 only. Every "
        f"operation needs the {_code('api-key')} header; most also need "
        f"{_code('Authorization: Bearer <token>')} from the password creation or a login.</p>",
        "<h2>Simulator, portal and operations</h2><ul>",
        f"<li>Sandbox simulator {_code('/simulate/api')} (header "
        f"{_code('programme-key: <api key>')}): {_link(root, '/simulate/api/docs')}</li>",
        f"<li>Portal: {_link(root, '/portal/')}</li>",
        f"<li>Operator API {_code('/portal/api')} (header "
        f"{_code('Authorization: Bearer <admin token>')}): "
        f"{_link(root, '/portal/api/docs')}</li>",
        f"<li>Operations: {_link(root, '/healthz')}, {_link(root, '/readyz')}, "
        f"{_code('/metrics')} (Prometheus, with the admin token)</li></ul>",
        "<h2>Your API key</h2>",
    ]
    create = (
        f"<p>Create a programme with {_code('multibank programme create --name NAME')}: it "
        "prints the programme's API key and profile ids (the operator API's "
        f"{_code('POST /portal/api/programmes')} does the same). "
        f"{_code('multibank serve')} creates the sandbox programme "
        f"{_code(DEFAULT_PROGRAMME)} when it starts.</p>"
    )
    key: str | None = None
    if not db_ok:
        parts.append("<p>The database did not answer: reload this page in a moment.</p>")
    elif live:
        parts.append(
            "<p>This server runs in live mode: API keys are not shown here. The operator reads "
            f"them with {_code('multibank programme show NAME')}.</p>"
        )
    elif sandbox is None:
        parts.append(f"<p>There is no sandbox programme named {_code(DEFAULT_PROGRAMME)}.</p>")
        parts.append(create)
    elif sandbox.api_key is None:
        parts.append(
            f"<p>Every API key of the sandbox programme {_code(DEFAULT_PROGRAMME)} (id "
            f"{_code(sandbox.programme_id)}) is revoked: create one with "
            f"{_code(f'POST /portal/api/programmes/{sandbox.programme_id}/api_keys')}.</p>"
        )
    else:
        key = sandbox.api_key
        profiles = "".join(
            f"<li>{html.escape(kind)}: {_code(pid)}</li>" for kind, pid in sandbox.profiles.items()
        )
        parts += [
            f"<p>The sandbox programme {_code(DEFAULT_PROGRAMME)} (id "
            f"{_code(sandbox.programme_id)}) has the API key</p>",
            f'<pre><code class="key" id="api-key">{html.escape(key)}</code></pre>',
            f"<p>Send it as {_code('api-key')} to the interface and as "
            f"{_code('programme-key')} to the simulator. Every one-time code of a sandbox "
            f"programme is {_code(CODE)}. Its profiles:</p>",
            f"<ul>{profiles}</ul>",
        ]
    if key is not None and sandbox is not None:
        parts += _quick_start(base, root, sandbox, key, email)
    parts.append("</body></html>")
    return "\n".join(parts)


def _quick_start(base: str, root: str, sandbox: Sandbox, key: str, email: str) -> list[str]:
    out = [
        '<h2 id="quick-start">Quick start</h2>',
        f"<p>From sign-up to a funded account and its statement, with curl against "
        f"{_code(base)}. Run the steps in order, in one shell. After a step that says "
        f"{_code('Then set from the answer: CORP=<id.id>')}, set that shell variable from the "
        f"JSON it answered (here its {_code('id')} object's {_code('id')}), e.g. "
        f"{_code('CORP=1234567890')}: the next steps use {_code('$CORP')}, "
        f"{_code('$USER_ID')}, {_code('$TOKEN')} and {_code('$ACCOUNT')}. Each answer is "
        "followed by its HTTP status. With jq, "
        '<a href="#quick-start-jq">the same steps as one script</a> set them for you.</p>',
    ]
    if sandbox.step_up_required:
        out.append(
            f"<p><strong>This programme demands step-up</strong> ({_code('stepUpRequired')}): "
            f"account operations answer 403 {_code('STEP_UP_REQUIRED')} until the session has "
            "stepped up with an enrolled factor (see the 3.29.1 docs), or until the operator "
            f"turns it off ({_code('PATCH /portal/api/programmes/{id}/settings')}).</p>"
        )
    all_steps = steps(sandbox, key, email)
    for number, step in enumerate(all_steps, start=1):
        out.append(f"<h3>{number}. {html.escape(step.title)}</h3>")
        out.append(f'<pre class="step">{html.escape(step_text(base, number, step))}</pre>')
    # The script names this server and key once, as $BASE and $KEY, so what comes next (the
    # README's first payment) works against whatever host and port the server listens on.
    script = "\n".join(
        (
            f"BASE={shlex.quote(base)}",
            f"KEY={shlex.quote(key)}",
            script_text("$BASE", steps(sandbox, "$KEY", email)),
        )
    )
    out += [
        '<h3 id="quick-start-jq">All at once, ids captured with jq</h3>',
        f"<p>The same steps as one script for bash or zsh: it sets {_code('$BASE')} (this "
        f"server) and {_code('$KEY')} (the API key), then {_code('jq')} sets "
        f"{_code('$CORP')}, {_code('$USER_ID')}, {_code('$TOKEN')} and {_code('$ACCOUNT')} "
        "from the answers: paste it whole, nothing to copy by hand. The variables stay set "
        "for your next commands.</p>",
        f'<pre class="script">{html.escape(script)}</pre>',
    ]
    out.append(
        "<p>Next: payments between accounts (transfers, sends, outgoing wire transfers) on "
        f"{_link(root, '/multi/docs')}; the simulator's other operations (KYC rejection, "
        f"deposits by IBAN, the programme clock) on {_link(root, '/simulate/api/docs')}.</p>"
    )
    return out


@router.api_route("/", methods=["GET", "HEAD"], response_class=HTMLResponse)
async def landing(request: Request, db: Db, container: AppContainer) -> HTMLResponse:
    live = container.settings.mode == "live"
    sandbox: Sandbox | None = None
    db_ok = True
    if not live:
        try:
            sandbox = await default_sandbox(db)
        except SQLAlchemyError:
            # The page still says where everything is when the database does not answer.
            log.warning("landing page: the default programme could not be read", exc_info=True)
            db_ok = False
    page = render(
        request_base(request),
        str(request.scope.get("root_path", "")),
        sandbox,
        live,
        f"ada.{secrets.token_hex(5)}@example.com",
        db_ok,
    )
    response = HTMLResponse(page, headers=SECURITY_HEADERS)
    if request.method == "HEAD":
        response.body = b""  # the headers (content-length too) of the GET, without its body
    return response
