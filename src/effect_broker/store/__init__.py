"""The ledger on PostgreSQL. Nothing outside this package imports asyncpg."""

from effect_broker.store.postgres import EffectFilter, EffectPage, Store

__all__ = ["EffectFilter", "EffectPage", "Store"]
