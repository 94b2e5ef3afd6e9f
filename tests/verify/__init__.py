"""The verify stage: answer extraction and equivalence, verifier rules, reasoning outputs."""
