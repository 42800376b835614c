"""The operator audit log (issue 35 §4, decision 0057)."""
