"""Answer checking: extraction, normalization, spelling, equivalence."""
