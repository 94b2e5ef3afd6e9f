"""The command line: errors, help, inputs from any folder, a new user's first steps."""
