"""The fault harness: damaged, forged and foreign artifacts on the default model."""
