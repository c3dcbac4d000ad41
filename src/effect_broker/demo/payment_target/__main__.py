"""``python -m effect_broker.demo.payment_target``: run the demo payment target."""

from effect_broker.demo.payment_target.command import main

main()
