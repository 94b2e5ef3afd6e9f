"""The store stage: the artifact reader, store folders, writer records, object stores, restore reads, the router."""
