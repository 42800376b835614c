"""Due diligence (KYB for corporates, KYC for consumers and users) behind a provider interface."""
