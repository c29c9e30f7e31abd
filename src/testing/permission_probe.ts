/**
 * @module
 * Test helper of privilege/permission_set_test.ts, run as a Worker under the agent's permission
 * set: tries each operation it is sent (a file read or write, a program run, or a pod-facing
 * call of the agent's own code such as an httpGet probe) and answers "ok" or the error's name
 * and message. Not part of the agent.
 */

/** One operation to try. */
export type ProbeOp =
  | { readonly op: "read"; readonly path: string }
  | { readonly op: "write"; readonly path: string }
  | { readonly op: "run"; readonly program: string; readonly args?: readonly string[] }
  | {
    readonly op: "httpGetProbe";
    readonly scheme: "HTTP" | "HTTPS";
    readonly port: number;
    readonly path: string;
  };

/** What one operation did. */
export interface ProbeAnswer {
  readonly ok: boolean;
  readonly error?: string;
}

async function attempt(op: ProbeOp): Promise<void> {
  switch (op.op) {
    case "read": {
      const info = await Deno.stat(op.path);
      if (info.isDirectory) await Array.fromAsync(Deno.readDir(op.path));
      else await Deno.readFile(op.path);
      return;
    }
    case "write":
      await Deno.writeTextFile(op.path, "probe\n");
      return;
    case "run":
      await new Deno.Command(op.program, { args: [...(op.args ?? [])], stdout: "null" }).output();
      return;
    case "httpGetProbe": {
      const { doHttpProbe, newRequestForHttpGetAction } = await import(
        "../prober/probe_http.ts"
      );
      const req = newRequestForHttpGetAction(
        { scheme: op.scheme, port: op.port, path: op.path },
        { name: "c" },
        "127.0.0.1",
        "kube-probe/1.36",
      );
      const r = await doHttpProbe(req, { timeoutMs: 5000 });
      if (r.result !== "Success") throw new Error(`${r.result}: ${r.output}`);
      return;
    }
  }
}

/** The worker's global scope (Deno's lib types `self` as a window). */
const scope = self as unknown as {
  onmessage: (e: MessageEvent<ProbeOp[]>) => void;
  postMessage(answers: ProbeAnswer[]): void;
};

scope.onmessage = async (e) => {
  const answers: ProbeAnswer[] = [];
  for (const op of e.data) {
    try {
      await attempt(op);
      answers.push({ ok: true });
    } catch (err) {
      answers.push({ ok: false, error: `${(err as Error).name}: ${(err as Error).message}` });
    }
  }
  scope.postMessage(answers);
};
