"""The judge layer: pure verdicts over what a step did on both sides: the parity contract's rows, the
per-step judge, the healthy-queue invariants, the queue's accounting and notification events.
"""
