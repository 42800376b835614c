"""Version 3.29.1 (also served as the latest at /multi): one router per interface tag."""

from __future__ import annotations

from fastapi import APIRouter

from multibank.api.v3_29 import access, consumers, corporates, passwords, users

ROUTERS: list[APIRouter] = [
    access.router,
    passwords.router,
    corporates.router,
    consumers.router,
    users.router,
]
