// Frames a side of the endpoint makes in one turn of the event loop, written together: one
// write(2) of one buffer per turn, however many pushes or replies the turn made. Corking the socket
// instead leaves a writev of as many small buffers, measured slower (bench/experiments/endpoint.mjs).
import type { Socket } from 'node:net';

export class Outbox {
  #frames: Uint8Array[] = [];
  #bytes = 0;

  add(socket: Socket, frame: Uint8Array): void {
    if (this.#frames.length === 0) process.nextTick(() => this.#flush(socket));
    this.#frames.push(frame);
    this.#bytes += frame.length;
  }

  /** Write what waits at once, then end the socket: the last frames go out before the end. */
  end(socket: Socket): void {
    this.#flush(socket);
    socket.end();
  }

  #flush(socket: Socket): void {
    const frames = this.#frames;
    const bytes = this.#bytes;
    if (frames.length === 0) return;
    this.#frames = [];
    this.#bytes = 0;
    if (socket.destroyed || socket.writableEnded) return;
    if (frames.length === 1) {
      socket.write(frames[0]!);
      return;
    }
    const out = Buffer.allocUnsafe(bytes);
    let at = 0;
    for (const f of frames) {
      out.set(f, at);
      at += f.length;
    }
    socket.write(out);
  }
}
