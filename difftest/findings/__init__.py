"""Findings: what tells one divergence from another, and the reviewed list of those already known."""
