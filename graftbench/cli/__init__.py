"""The command line: parsing and printing only."""
