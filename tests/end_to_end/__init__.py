"""End to end: whole commands and documented workflows run as a user runs them."""
