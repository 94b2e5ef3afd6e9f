"""The artifact store: ids, codec, reader, index, folder and object stores behind one ``open_store``, the router."""
