"""JSON logs that carry the request-ref, and the Prometheus metrics of D10."""

from __future__ import annotations

import json
import logging
import os
import sys
from contextvars import ContextVar
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)

request_ref_var: ContextVar[str | None] = ContextVar("request_ref", default=None)

REQUESTS = Counter(
    "multibank_http_requests_total",
    "HTTP requests by route and status",
    ["method", "route", "status"],
)
REQUEST_LATENCY = Histogram(
    "multibank_http_request_duration_seconds", "HTTP request latency by route", ["method", "route"]
)
LEDGER_POSTINGS = Counter(
    "multibank_ledger_postings_total", "Ledger postings written", ["currency"]
)
_POSTINGS_BY_CURRENCY: dict[str, Any] = {}


def posting_counted(currency: str) -> None:
    """One posting in `currency` counted. Each currency's child is looked up once: the client
    library's `labels()` validates and locks on every call (as `api/middleware.py` notes)."""
    child = _POSTINGS_BY_CURRENCY.get(currency)
    if child is None:
        child = _POSTINGS_BY_CURRENCY[currency] = LEDGER_POSTINGS.labels(currency)
    child.inc()


# Record attributes that are not our fields (uvicorn adds an ANSI-coloured copy of its message).
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",
}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        ref = getattr(record, "request_ref", None) or request_ref_var.get()
        if ref:
            out["request_ref"] = ref
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(level: str = "INFO", json_logs: bool = True) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if json_logs:
        handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("uvicorn.access").disabled = True


def render_metrics() -> tuple[bytes, str]:
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST
