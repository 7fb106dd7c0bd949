"""The staff-only web panel (spec §8): the global automation panel and the local composer status."""
