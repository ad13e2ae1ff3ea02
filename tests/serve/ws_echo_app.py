"""Ray's "Set up WebSockets" example app (doc_code/http_guide/websockets_example.py), only the import changed; its
``serve.run`` is the tests' (``test_serve_websocket_default``, and ``muster serve run ws_echo_app:EchoServer``)."""

from fastapi import FastAPI, WebSocket, WebSocketDisconnect

from muster import serve

app = FastAPI()


@serve.deployment
@serve.ingress(app)
class EchoServer:
    @app.websocket("/")
    async def echo(self, ws: WebSocket):
        await ws.accept()

        try:
            while True:
                text = await ws.receive_text()
                await ws.send_text(text)
        except WebSocketDisconnect:
            print("Client disconnected.")
