"""The web, through the host: a guard for every address, page fetches, search backends."""
