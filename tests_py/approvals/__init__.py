"""Approvals bound to a call, used once."""
