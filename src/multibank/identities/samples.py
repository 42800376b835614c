"""Sign-up bodies that the interface accepts as written: one corporate and one consumer.

The home page's quick start, the docs' request examples, `multibank sandbox seed` and the
portal's screenshots all sign the same sample people up; they differ only in the e-mail, the
tag and the company's name.
"""

from __future__ import annotations

from typing import Any


def corporate_signup(
    profile_id: str,
    email: str,
    *,
    tag: str | None = None,
    company: str = "Acme Ltd",
    currency: str = "EUR",
) -> dict[str, Any]:
    """The body of `POST /corporates`: Ada Lovelace, director of `company`."""
    body: dict[str, Any] = {
        "profileId": profile_id,
        "rootUser": {
            "name": "Ada",
            "surname": "Lovelace",
            "email": email,
            "mobile": {"countryCode": "+44", "number": "7700900123"},
            "companyPosition": "DIRECTOR",
            "dateOfBirth": {"year": 1980, "month": 12, "day": 10},
        },
        "company": {
            "type": "LLC",
            "name": company,
            "registrationNumber": "C1234567",
            "registrationCountry": "GB",
            "businessAddress": {
                "addressLine1": "1 High Street",
                "city": "London",
                "postCode": "EC1A 1BB",
                "country": "GB",
            },
            "incorporatedOn": {"year": 2001, "month": 2, "day": 3},
        },
        "industry": "ACCOUNTING",
        "sourceOfFunds": "ORDINARY_BUSINESS_ACTIVITY",
        "acceptedTerms": True,
        "ipAddress": "127.0.0.1",
        "baseCurrency": currency,
    }
    if tag is not None:
        body["tag"] = tag
    return body


def consumer_signup(
    profile_id: str, email: str, *, tag: str | None = None, currency: str = "EUR"
) -> dict[str, Any]:
    """The body of `POST /consumers`: Grace Hopper, of Valletta."""
    body: dict[str, Any] = {
        "profileId": profile_id,
        "rootUser": {
            "name": "Grace",
            "surname": "Hopper",
            "email": email,
            "mobile": {"countryCode": "+356", "number": "79000000"},
            "dateOfBirth": {"year": 1990, "month": 1, "day": 2},
            "occupation": "AUDIT",
            "address": {"addressLine1": "2 Main St", "city": "Valletta", "country": "MT"},
            "nationality": "MT",
            "placeOfBirth": "Valletta",
        },
        "acceptedTerms": True,
        "ipAddress": "127.0.0.1",
        "baseCurrency": currency,
    }
    if tag is not None:
        body["tag"] = tag
    return body
