/**
 * @module
 * A small D-Bus client over a unix socket: EXTERNAL authentication with the process's uid,
 * method calls with replies and errors, property reads, match rules and signals, and the few
 * server-side pieces a test service needs (own a name, answer calls, emit signals). It is what
 * godbus is to the upstream kubelet's node shutdown manager (`nodeshutdown/systemd`), for the
 * calls that manager makes to systemd-logind and systemd. No file descriptors: Deno cannot pass
 * them over a unix socket, so a logind inhibitor lock is held by `systemd-inhibit` instead
 * (see `nodeshutdown/nodeshutdown_manager.ts`).
 */

import {
  type DBusMessage,
  type DBusValue,
  type DBusVariant,
  decodeMessage,
  encodeMessage,
  messageLength,
  MessageType,
} from "./_dbus_marshal.ts";

export type { DBusValue, DBusVariant } from "./_dbus_marshal.ts";

/** Where the system bus listens unless DBUS_SYSTEM_BUS_ADDRESS says otherwise. */
export const DEFAULT_SYSTEM_BUS_ADDRESS = "unix:path=/run/dbus/system_bus_socket";

/** The system bus address: DBUS_SYSTEM_BUS_ADDRESS, else the well-known socket. */
export function systemBusAddress(env: (name: string) => string | undefined): string {
  return env("DBUS_SYSTEM_BUS_ADDRESS") || DEFAULT_SYSTEM_BUS_ADDRESS;
}

/** A failed connection, or an error reply; `dbusName` is the D-Bus error name when there is one. */
export class DBusError extends Error {
  override name = "DBusError";
  constructor(message: string, readonly dbusName?: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/** The socket path of the first `unix:path=` entry of a bus address. */
export function unixPathOf(address: string): string {
  for (const entry of address.split(";")) {
    const [transport, params = ""] = entry.split(/:(.*)/s);
    if (transport !== "unix") continue;
    for (const kv of params.split(",")) {
      const [k, v] = kv.split(/=(.*)/s);
      if (k === "path" && v) return decodeURIComponent(v);
    }
  }
  throw new DBusError(
    `bus address '${address}' has no unix:path= entry (abstract sockets and tcp are not supported yet)`,
  );
}

/** A method call to make. */
export interface DBusCall {
  readonly destination: string;
  readonly path: string;
  readonly interface: string;
  readonly member: string;
  readonly signature?: string;
  readonly body?: readonly DBusValue[];
}

/** What a method handler answers: a reply body, or a thrown {@link DBusError}. */
export type DBusMethodHandler = (
  m: DBusMessage,
) =>
  | { signature?: string; body?: DBusValue[] }
  | Promise<{ signature?: string; body?: DBusValue[] }>;

/** Options of {@link DBusConnection.connect}. */
export interface DBusConnectOptions {
  readonly address: string;
  /** @default Deno.uid() */
  readonly uid?: number;
  readonly signal?: AbortSignal;
}

const enc = new TextEncoder();

/** One connection to a bus. */
export class DBusConnection {
  readonly #conn: Deno.UnixConn;
  #serial = 0;
  #buf: Uint8Array = new Uint8Array(0);
  readonly #pending = new Map<number, PromiseWithResolvers<DBusMessage>>();
  readonly #signalHandlers = new Set<(m: DBusMessage) => void>();
  readonly #methods = new Map<string, DBusMethodHandler>();
  #closed = false;
  /** Resolves when the connection ends, for whatever reason. */
  readonly closed: Promise<void>;
  /** The bus's name for this connection (from Hello). */
  uniqueName = "";

  private constructor(conn: Deno.UnixConn) {
    this.#conn = conn;
    this.closed = this.#readLoop();
  }

  /** Connects, authenticates and says Hello. */
  static async connect(opts: DBusConnectOptions): Promise<DBusConnection> {
    const path = unixPathOf(opts.address);
    let conn: Deno.UnixConn;
    try {
      conn = await Deno.connect({ transport: "unix", path });
    } catch (e) {
      throw new DBusError(
        `cannot connect to the bus at ${path}: ${(e as Error).message}`,
        undefined,
        {
          cause: e,
        },
      );
    }
    const onAbort = () => conn.close();
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      const rest = await authenticate(conn, opts.uid ?? Deno.uid() ?? 0, path);
      const bus = new DBusConnection(conn);
      bus.#buf = rest;
      bus.#drain();
      const [name] = await bus.call({
        destination: "org.freedesktop.DBus",
        path: "/org/freedesktop/DBus",
        interface: "org.freedesktop.DBus",
        member: "Hello",
      });
      bus.uniqueName = String(name);
      return bus;
    } catch (e) {
      try {
        conn.close();
      } catch { /* already closed */ }
      throw e instanceof DBusError ? e : new DBusError(`bus at ${path}: ${(e as Error).message}`);
    } finally {
      opts.signal?.removeEventListener("abort", onAbort);
    }
  }

  #send(m: Omit<DBusMessage, "serial">): number {
    if (this.#closed) throw new DBusError("the bus connection is closed");
    const serial = ++this.#serial;
    const bytes = encodeMessage({ ...m, serial });
    // Writes are queued in order by the runtime; a failure ends the connection.
    void writeAll(this.#conn, bytes).catch(() => this.close());
    return serial;
  }

  /** Calls a method and returns the reply's body; an error reply throws {@link DBusError}. */
  async call(c: DBusCall, signal?: AbortSignal): Promise<DBusValue[]> {
    const serial = this.#send({
      type: MessageType.methodCall,
      flags: 0,
      destination: c.destination,
      path: c.path,
      interface: c.interface,
      member: c.member,
      signature: c.signature ?? "",
      body: c.body ?? [],
    });
    const reply = Promise.withResolvers<DBusMessage>();
    this.#pending.set(serial, reply);
    const onAbort = () => {
      this.#pending.delete(serial);
      reply.reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      const m = await reply.promise;
      if (m.type === MessageType.error) {
        const text = typeof m.body[0] === "string" ? m.body[0] : "";
        throw new DBusError(`${c.interface}.${c.member}: ${m.errorName}: ${text}`, m.errorName);
      }
      return [...m.body];
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
  }

  /** org.freedesktop.DBus.Properties.Get, unwrapped from its variant. */
  async getProperty(
    destination: string,
    path: string,
    iface: string,
    name: string,
    signal?: AbortSignal,
  ): Promise<DBusValue> {
    const [v] = await this.call({
      destination,
      path,
      interface: "org.freedesktop.DBus.Properties",
      member: "Get",
      signature: "ss",
      body: [iface, name],
    }, signal);
    return (v as DBusVariant).value;
  }

  /** Asks the bus to route signals matching `rule` here. */
  async addMatch(rule: string, signal?: AbortSignal): Promise<void> {
    await this.call({
      destination: "org.freedesktop.DBus",
      path: "/org/freedesktop/DBus",
      interface: "org.freedesktop.DBus",
      member: "AddMatch",
      signature: "s",
      body: [rule],
    }, signal);
  }

  /** Calls `fn` with every signal delivered; returns the function that stops it. */
  onSignal(fn: (m: DBusMessage) => void): () => void {
    this.#signalHandlers.add(fn);
    return () => this.#signalHandlers.delete(fn);
  }

  /** Takes a well-known name (for a service). */
  async requestName(name: string): Promise<void> {
    const [r] = await this.call({
      destination: "org.freedesktop.DBus",
      path: "/org/freedesktop/DBus",
      interface: "org.freedesktop.DBus",
      member: "RequestName",
      signature: "su",
      body: [name, 4], // DBUS_NAME_FLAG_DO_NOT_QUEUE
    });
    if (r !== 1) throw new DBusError(`cannot own the name ${name} (RequestName answered ${r})`);
  }

  /** Answers calls of `iface.member` (any path) with `handler`. */
  handle(iface: string, member: string, handler: DBusMethodHandler): void {
    this.#methods.set(`${iface}.${member}`, handler);
  }

  /** Sends a signal. */
  emit(path: string, iface: string, member: string, signature: string, body: DBusValue[]): void {
    this.#send({
      type: MessageType.signal,
      flags: 0,
      path,
      interface: iface,
      member,
      signature,
      body,
    });
  }

  /** Ends the connection; pending calls fail. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#conn.close();
    } catch { /* already closed */ }
    for (const p of this.#pending.values()) p.reject(new DBusError("the bus connection closed"));
    this.#pending.clear();
  }

  async #readLoop(): Promise<void> {
    // Let the constructor's caller put the bytes read with the auth reply in place first.
    await Promise.resolve();
    const chunk = new Uint8Array(64 * 1024);
    try {
      while (!this.#closed) {
        const n = await this.#conn.read(chunk);
        if (n === null) break;
        const next = new Uint8Array(this.#buf.length + n);
        next.set(this.#buf);
        next.set(chunk.subarray(0, n), this.#buf.length);
        this.#buf = next;
        this.#drain();
      }
    } catch {
      // A read error ends the connection like EOF.
    } finally {
      this.close();
    }
  }

  #drain(): void {
    for (;;) {
      const len = messageLength(this.#buf);
      if (len === undefined) return;
      const m = decodeMessage(this.#buf.subarray(0, len));
      this.#buf = this.#buf.slice(len);
      this.#dispatch(m);
    }
  }

  #dispatch(m: DBusMessage): void {
    if (m.type === MessageType.methodReturn || m.type === MessageType.error) {
      const p = m.replySerial === undefined ? undefined : this.#pending.get(m.replySerial);
      if (p) {
        this.#pending.delete(m.replySerial!);
        p.resolve(m);
      }
      return;
    }
    if (m.type === MessageType.signal) {
      for (const fn of this.#signalHandlers) fn(m);
      return;
    }
    if (m.type === MessageType.methodCall) void this.#answer(m);
  }

  async #answer(m: DBusMessage): Promise<void> {
    const handler = this.#methods.get(`${m.interface}.${m.member}`);
    try {
      if (!handler) {
        throw new DBusError(
          `no method ${m.interface}.${m.member}`,
          "org.freedesktop.DBus.Error.UnknownMethod",
        );
      }
      const r = await handler(m);
      this.#send({
        type: MessageType.methodReturn,
        flags: 1,
        replySerial: m.serial,
        destination: m.sender,
        signature: r.signature ?? "",
        body: r.body ?? [],
      });
    } catch (e) {
      if (this.#closed) return;
      this.#send({
        type: MessageType.error,
        flags: 1,
        replySerial: m.serial,
        destination: m.sender,
        errorName: e instanceof DBusError && e.dbusName
          ? e.dbusName
          : "org.freedesktop.DBus.Error.Failed",
        signature: "s",
        body: [(e as Error).message],
      });
    }
  }
}

async function writeAll(conn: Deno.UnixConn, bytes: Uint8Array): Promise<void> {
  let off = 0;
  while (off < bytes.length) off += await conn.write(bytes.subarray(off));
}

/** SASL EXTERNAL with the uid; returns any bytes read past the server's OK line. */
async function authenticate(
  conn: Deno.UnixConn,
  uid: number,
  path: string,
): Promise<Uint8Array> {
  const hex = [...enc.encode(String(uid))].map((b) => b.toString(16).padStart(2, "0")).join("");
  await writeAll(conn, enc.encode(`\0AUTH EXTERNAL ${hex}\r\n`));
  let got = new Uint8Array(0);
  const chunk = new Uint8Array(512);
  for (;;) {
    const at = got.indexOf(0x0a);
    if (at >= 0) {
      const line = new TextDecoder().decode(got.subarray(0, at)).trim();
      if (!line.startsWith("OK ")) {
        throw new DBusError(
          `the bus at ${path} refused EXTERNAL authentication as uid ${uid}: ${line}`,
        );
      }
      await writeAll(conn, enc.encode("BEGIN\r\n"));
      return got.slice(at + 1);
    }
    if (got.length > 4096) throw new DBusError(`the bus at ${path} sent no auth reply line`);
    const n = await conn.read(chunk);
    if (n === null) throw new DBusError(`the bus at ${path} closed the connection during auth`);
    const next = new Uint8Array(got.length + n);
    next.set(got);
    next.set(chunk.subarray(0, n), got.length);
    got = next;
  }
}
