"""The baseline: a bare FastAPI JSON endpoint, served exactly as multibank is (uvicorn, one
worker, the same host), so the ratio shows what multibank's own work costs."""

from fastapi import FastAPI

app = FastAPI()


@app.get("/ping")
async def ping() -> dict[str, str]:
    return {"status": "ok"}
