"""The ledger on PostgreSQL. Nothing outside this package imports asyncpg."""

from effect_broker.store.postgres import AttemptTerms, EffectFilter, EffectPage, Store

__all__ = ["AttemptTerms", "EffectFilter", "EffectPage", "Store"]
