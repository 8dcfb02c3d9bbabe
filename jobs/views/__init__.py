"""The researcher's pages, one module per area: health, account (team switch), dashboard, launch,
workloads (list, page, logs, events, cancel, share), usage, queue, secrets and members. `common` holds what they
share: which team a page acts for, and the team-page decorator.
"""
