"""Writes to the loop registry: making a loop (create), editing it (edit), and what moves it
through its states (lifecycle: pause, resume, run now, retry, delete). The tools, the panel, the
admin, the operator API and the v1 import all call these functions; none writes a loop itself.

Each change to an existing loop is one transaction that locks the loop's row first (PostgreSQL;
SQLite's IMMEDIATE transactions serialize writers), so it is ordered with the clock's claim of
the same loop: an operation never races a claim into a double delivery or a lost update. Each
records an event (loops.events) with its actor.
"""
