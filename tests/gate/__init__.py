"""Tests of the gate: op-level checks, records, reference.lock, the model-level gate, the CLI."""
