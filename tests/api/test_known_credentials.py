"""A login checks its password against the hash remembered from the user's last login on this
process, without reading the user first (decision 0025). What is remembered is only a hint:
whatever changed since (the password, the e-mail, the user's state, here or in another process)
decides the next login exactly as if nothing were remembered."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import update

from multibank.container import Container
from multibank.users.models import User
from tests.conftest import Prog
from tests.factories import PASSWORD, corporate_body, email, invited_user, login, sign_up

NEW = "An0ther-secret!"
WRONG = "Wrong-passw0rd!"


async def logs_in(client: httpx.AsyncClient, p: Prog, address: str, password: str) -> int:
    r = await login(client, p, address, password)
    if r.status_code == 200:
        # The token answered is a working one.
        headers = {**p.headers, "Authorization": f"Bearer {r.json()['token']}"}
        assert (await client.get("/multi/corporates", headers=headers)).status_code == 200
    return r.status_code


async def set_hash_behind_the_servers_back(container: Container, address: str, new: str) -> None:
    """The password changed by another process: this one was told nothing."""
    encoded = await container.hasher.hash(new)
    async with container.db.transaction() as session:
        await session.execute(
            update(User).where(User.email_key == address.lower()).values(password_hash=encoded)
        )


async def test_a_password_changed_elsewhere_counts_at_once(
    client, programme, container: Container
) -> None:
    p = await programme()
    root = await sign_up(client, p)
    assert await logs_in(client, p, root.email, PASSWORD) == 200  # remembered from here on
    await set_hash_behind_the_servers_back(container, root.email, NEW)
    assert await logs_in(client, p, root.email, PASSWORD) == 403
    assert await logs_in(client, p, root.email, NEW) == 200
    assert await logs_in(client, p, root.email, NEW) == 200
    assert await logs_in(client, p, root.email, PASSWORD) == 403


@pytest.mark.parametrize("base", ["/multi", "/3.1.0/multi"])
async def test_a_password_updated_here_counts_at_once(client, programme, base: str) -> None:
    p = await programme()
    root = await sign_up(client, p)
    r = await login(client, p, root.email, PASSWORD, base)
    assert r.status_code == 200, r.text
    headers = {**p.headers, "Authorization": f"Bearer {r.json()['token']}"}
    body = {"oldPassword": {"value": PASSWORD}, "newPassword": {"value": NEW}}
    r = await client.post(f"{base}/passwords/update", headers=headers, json=body)
    assert r.status_code == 200, r.text
    assert (await login(client, p, root.email, PASSWORD, base)).status_code == 403
    assert (await login(client, p, root.email, NEW, base)).status_code == 200


async def test_an_email_changed_stops_the_old_one(client, programme) -> None:
    p = await programme()
    root = await sign_up(client, p)
    user_id, old_email, _ = await invited_user(client, p, root)
    assert await logs_in(client, p, old_email, PASSWORD) == 200
    new_email = email()
    r = await client.patch(
        f"/multi/users/{user_id}", headers=root.headers, json={"email": new_email}
    )
    assert r.status_code == 200, r.text
    assert await logs_in(client, p, old_email, PASSWORD) == 403
    assert await logs_in(client, p, new_email, PASSWORD) == 200


async def test_a_deactivated_user_is_refused(client, programme) -> None:
    p = await programme()
    root = await sign_up(client, p)
    user_id, user_email, _ = await invited_user(client, p, root)
    assert await logs_in(client, p, user_email, PASSWORD) == 200
    r = await client.post(f"/multi/users/{user_id}/deactivate", headers=root.headers)
    assert r.status_code == 204, r.text
    assert await logs_in(client, p, user_email, PASSWORD) == 403
    r = await client.post(f"/multi/users/{user_id}/activate", headers=root.headers)
    assert r.status_code == 204, r.text
    assert await logs_in(client, p, user_email, PASSWORD) == 200


async def test_wrong_passwords_still_count_and_lock(client, programme) -> None:
    """A wrong password against a remembered hash is a failed login like any other: at the
    programme's limit the root user is locked, the right password then answers 423."""
    p = await programme(failedLoginLimit=3)
    root = await sign_up(client, p)
    assert await logs_in(client, p, root.email, PASSWORD) == 200
    assert await logs_in(client, p, root.email, WRONG) == 403
    assert await logs_in(client, p, root.email, PASSWORD) == 200  # resets the count
    for _ in range(3):
        assert await logs_in(client, p, root.email, WRONG) == 403
    assert await logs_in(client, p, root.email, PASSWORD) == 423


async def test_the_same_email_in_two_programmes_is_two_users(client, programme) -> None:
    a, b = await programme(), await programme()
    address = email()
    for p in (a, b):
        await sign_up(client, p, rootUser={**corporate_body(p)["rootUser"], "email": address})
    await set_hash_in_programme(client, b, address)
    assert await logs_in(client, a, address, PASSWORD) == 200
    assert await logs_in(client, b, address, PASSWORD) == 403
    assert await logs_in(client, b, address, NEW) == 200
    assert await logs_in(client, a, address, NEW) == 403
    assert await logs_in(client, a, address, PASSWORD) == 200


async def set_hash_in_programme(client: httpx.AsyncClient, p: Prog, address: str) -> None:
    """The user of `address` in `p` changes their password to NEW (through the API)."""
    r = await login(client, p, address, PASSWORD)
    assert r.status_code == 200, r.text
    headers = {**p.headers, "Authorization": f"Bearer {r.json()['token']}"}
    body = {"oldPassword": {"value": PASSWORD}, "newPassword": {"value": NEW}}
    r = await client.post("/multi/passwords/update", headers=headers, json=body)
    assert r.status_code == 200, r.text
