"""inferplane CrossGuard policy pack (see issue: Policy pack)."""
