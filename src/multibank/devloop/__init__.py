"""The developer loop of issue 35: trigger an event, replay one, reset, export and import a
sandbox programme (decision 0051)."""
