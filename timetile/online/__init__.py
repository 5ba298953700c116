"""Online serving: KV stores, batch upload, the fetcher and the HTTP service (DESIGN §5).

Not built yet: it arrives with the online-serving issue.
"""
