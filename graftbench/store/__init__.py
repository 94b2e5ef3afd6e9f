"""The artifact store: ids, codec, reader, index, folder and object stores, the router."""
