"""The global automation panel and the local composer status (spec §8, contract §8), by page
family: the lists, one loop's pages, operating a loop; what they share is in common.

Thin views over the same selectors and services as the tools and the operator API.
"""
