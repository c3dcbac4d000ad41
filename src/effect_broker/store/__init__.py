"""The ledger on PostgreSQL. Nothing outside this package imports asyncpg."""

from effect_broker.store.postgres import Store
from effect_broker.store.reads import EffectFilter, EffectPage
from effect_broker.store.write_requests import AttemptTerms

__all__ = ["AttemptTerms", "EffectFilter", "EffectPage", "Store"]
