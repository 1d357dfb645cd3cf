"""/: the page a browser gets (serve/page.py holds it)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from ..page import PAGE

router = APIRouter()


@router.get("/")
async def page():
    return HTMLResponse(PAGE)
