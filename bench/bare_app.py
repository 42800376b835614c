"""The baseline: a bare FastAPI JSON endpoint, served exactly as multibank is (uvicorn, one
worker, the same host, uvicorn's default HTTP protocol), so the ratio shows what
multibank's own work costs.

Usage: .venv/bin/python bench/bare_app.py --port N"""

import argparse

import uvicorn
from fastapi import FastAPI

app = FastAPI()


@app.get("/ping")
async def ping() -> dict[str, str]:
    return {"status": "ok"}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    uvicorn.run(
        "bare_app:app",
        port=args.port,
        log_level="warning",
        server_header=False,
    )
