/**
 * @module
 * Test helper of privilege/permission_set_test.ts, run as a Worker under the agent's permission set: tries each
 * operation it is sent and answers "ok" or the error's name and message. Not part of the agent.
 */

/** One operation to try. */
export type ProbeOp =
  | { readonly op: "read"; readonly path: string }
  | { readonly op: "write"; readonly path: string }
  | { readonly op: "run"; readonly program: string; readonly args?: readonly string[] };

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
