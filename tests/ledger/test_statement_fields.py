"""A payment's statement fields as each of its accounts sees them (`account_details`): ledger
rows written before the fields took the interface's names (contract.md, StatementEntry; issue
32) are shown under the names newer rows are written with."""

from __future__ import annotations

from multibank.ledger.statements import account_details


def test_a_wire_transfer_written_with_the_old_names_shows_the_new_ones() -> None:
    old = {
        "byAccount": {
            "7": {
                "fee": 100,
                "transactionAmount": -5000,
                "fields": {
                    "beneficiaryName": "Ada Lovelace",
                    "beneficiaryIban": "DE89370400440532013000",
                    "beneficiaryBankIdentifierCode": "COBADEFFXXX",
                    "reference": "Invoice 42",
                    "type": "SEPA",
                },
            }
        }
    }
    assert account_details(old, 7) == (
        {
            "beneficiaryName": "Ada Lovelace",
            "beneficiaryAccount": "DE89370400440532013000",
            "beneficiaryBankCode": "COBADEFFXXX",
            "description": "Invoice 42",
        },
        100,
        -5000,
    )
    fps = {
        "byAccount": {
            "7": {
                "fields": {"beneficiaryAccountNumber": "12345678", "beneficiarySortCode": "400400"}
            }
        }
    }
    assert account_details(fps, 7)[0] == {
        "beneficiaryAccount": "12345678",
        "beneficiaryBankCode": "400400",
    }
    returned = {"byAccount": {"7": {"fields": {"returnedTransferId": "42"}}}}
    assert account_details(returned, 7)[0] == {
        "relatedTransactionId": "42",
        "relatedTransactionIdType": "OUTGOING_WIRE_TRANSFER",
    }


def test_other_transactions_keep_their_fields() -> None:
    """A deposit's `reference` is its own field, not a payment's (only `byAccount` is renamed)."""
    deposit = {"sender": "Ada", "reference": "May rent"}
    assert account_details(deposit, 7) == (deposit, 0, None)
    send = {"byAccount": {"7": {"fields": {"destinationIdentityName": "Grace Hopper"}}}}
    assert account_details(send, 7)[0] == {"destinationIdentityName": "Grace Hopper"}
