"""The docs pages work without internet (the guide: no asset from a CDN): Swagger UI and ReDoc
of every base load only what this server serves, and the description they point at is there."""

from __future__ import annotations

import re

import pytest

BASES = ("/multi", "/3.29.1/multi", "/3.1.0/multi", "/simulate/api", "/portal/api")
# Every URL a page loads: script and link tags, Swagger UI's `url:` and ReDoc's `spec-url`.
LOADS = re.compile(r"""(?:src|href|spec-url)=["']([^"']+)["']|url: ?["']([^"']+)["']""")


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("page", ["docs", "redoc"])
async def test_docs_pages_load_only_what_the_server_serves(client, base, page):
    r = await client.get(f"{base}/{page}")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    urls = [a or b for a, b in LOADS.findall(r.text)]
    assert urls, r.text
    assert "http://" not in r.text and "https://" not in r.text, "a page must not load from afar"
    for url in urls:
        assert url.startswith("/"), url
        got = await client.get(url)
        assert got.status_code == 200, (url, got.status_code)
    assert f"{base}/openapi.json" in urls
    scripts = [u for u in urls if u.endswith(".js")]
    assert scripts and all(u.startswith("/static/docs/") for u in scripts)


@pytest.mark.parametrize("page", ["docs", "redoc"])
async def test_the_root_docs_are_the_latest_versions(client, page):
    r = await client.get(f"/{page}")
    assert (r.status_code, r.headers["location"]) == (307, f"/multi/{page}")
    assert (await client.get(r.headers["location"])).status_code == 200
