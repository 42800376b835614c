"""Every base URL typed into a browser, with or without its trailing slash, leads to its docs
(issue 32 §1): a newcomer who opens `/multi` meets the operations, not a 404."""

from __future__ import annotations

import httpx
import pytest

BASES = (
    "/multi",
    "/3.29.1/multi",
    "/3.1.0/multi",
    "/3.63.4/multi",
    "/simulate/api",
    "/portal/api",
)


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("slash", ["", "/"])
async def test_a_base_url_leads_to_its_docs(
    client: httpx.AsyncClient, base: str, slash: str
) -> None:
    first = await client.get(base + slash)
    assert first.status_code == 307
    assert first.headers["location"] == f"{base}/docs"
    docs = await client.get(first.headers["location"])
    assert docs.status_code == 200
    assert "swagger-ui" in docs.text
    assert f"{base}/openapi.json" in docs.text


@pytest.mark.parametrize("base", BASES)
async def test_head_of_a_base_url_redirects_too(client: httpx.AsyncClient, base: str) -> None:
    answer = await client.head(base)
    assert answer.status_code == 307
    assert answer.headers["location"] == f"{base}/docs"
