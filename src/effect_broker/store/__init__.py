"""The ledger on PostgreSQL. Nothing outside this package imports asyncpg."""

from effect_broker.models import AttemptTerms, EffectFilter, EffectPage
from effect_broker.store.postgres import Store

__all__ = ["AttemptTerms", "EffectFilter", "EffectPage", "Store"]
