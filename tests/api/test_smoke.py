from tests.conftest import BASES


async def test_openapi_per_base(client, programme):
    p = await programme()
    for base in BASES:
        r = await client.get(f"{base}/openapi.json")
        assert r.status_code == 200
    r = await client.post(
        "/multi/passwords/validate", headers=p.headers, json={"password": {"value": "short"}}
    )
    assert r.status_code == 409, r.text
    assert r.json() == {"errorCode": "PASSWORD_TOO_SHORT"}
