"""The report stage: tables, the viewer and its plots."""
