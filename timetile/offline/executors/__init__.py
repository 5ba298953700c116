"""Executors: how a part's features are computed (DESIGN §4). TODO"""
