"""The card steps the programme clock makes due, in one place: manufacturing (D25), expiry,
renewal and the about-to-expire notice (D24), and the expiry of authorisations held too long
(D23, D24). The scheduler of due work (programmes/due.py) takes them, in this order within a
round (each kind takes its own rows, each in a transaction of its own, so the order only decides
which runs first)."""

from __future__ import annotations

from multibank.cards import lifecycle, manufacturing, money_steps

WORK = (manufacturing.DUE, lifecycle.DUE, money_steps.DUE)
