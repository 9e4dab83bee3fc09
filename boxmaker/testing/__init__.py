"""Fakes shared by tests: small honest implementations, never imported by a role."""
