"""The recording directory and its services, whoever records into it (the endpoint, MCP relays, the
bundled agent's scenarios): plans and the models they run, harvest and normalization, scrubbing, the
one stable writer with its journaled swap, recovery, locks and staging, kept runs, fixtures loading,
line-by-line log reads and validation. Its modules are imported where used (no eager exports): the
writer, for one, runs in updates and recordings only."""
