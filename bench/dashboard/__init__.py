"""`python -m bench.dashboard`: renders docs/monitoring-dashboard.png from a real run.

The picture in docs/monitoring.md ("Grafana dashboard") is docs/grafana-dashboard.json drawn from a
real dshloop, not from invented numbers. This starts the web server (uvicorn, as in production)
and one `manage.py runloops` on a fresh database, creates a mix of loops through the API, scrapes
GET /metrics every 5 s as Prometheus would, and breaks things on a timeline (the *_AT times below) so that
every panel has something to show. Then it evaluates each panel's query the way Prometheus does
(rate() with its extrapolation, histogram_quantile() by linear interpolation, the alert rules of
docs/prometheus/dshloop.rules.yml with their `for:`) and draws the panels in Grafana's dark style,
with the JSON's titles and layout. About 5 minutes; needs the `docs` extra (matplotlib).

Web and scheduler run as separate processes, as docs/production.md advises under a
process manager: `manage.py serve` would restart a crashed scheduler within a second and hide the
outage the dashboard is meant to show.

Only the PNG is kept. The scrapes are a few hundred kilobytes that differ on every run; with
--keep the temporary directory (scrapes.jsonl, the processes' logs) stays for a closer look, and
--replay DIR draws it again without a new run (to work on the picture).
"""
