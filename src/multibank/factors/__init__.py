"""Additional authentication factors (SMS OTP, push) and step-up challenges."""
