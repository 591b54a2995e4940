"""Every figure the kit draws, with matplotlib's object API; `style` holds what they share."""
