"""Builds one FastAPI application per base URL (D2), each with its own openapi.json and /docs."""

from __future__ import annotations

from fastapi import FastAPI

from multibank.api import v3_1, v3_29
from multibank.api.errors import install_error_handlers
from multibank.api.openapi import DescribedApp
from multibank.api.routing import IndexedRouter, absent, compose

DESCRIPTION = (
    "Multi Product Banking Service interface {version}, served by multibank. Every operation "
    "needs the `api-key` header; most also need `Authorization: Bearer <token>` from login."
)


def _version_app(version: str) -> FastAPI:
    app = DescribedApp(
        title="Multi Product Banking Service",
        version=version,
        description=DESCRIPTION.format(version=version),
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url="/redoc",
    )
    install_error_handlers(app)
    IndexedRouter.adopt(app.router)
    return app


def build_v3_29() -> FastAPI:
    app = _version_app("3.29.1")
    app.router.routes.extend(compose(v3_29.ROUTERS).routes)
    app.router.routes.extend(absent(v3_1.OVERRIDES, v3_29.ROUTERS).routes)
    return app


def build_v3_1() -> FastAPI:
    app = _version_app("3.1.0")
    app.router.routes.extend(compose(v3_29.ROUTERS, v3_1.OVERRIDES, v3_1.REMOVED).routes)
    return app
