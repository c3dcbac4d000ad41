"""The HTTP side of effect-broker: the aiohttp proxy that puts the ledger in the path."""
