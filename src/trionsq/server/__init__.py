"""The broker's network edges: TCP protocol V2 connections (and later HTTP, admin)."""
