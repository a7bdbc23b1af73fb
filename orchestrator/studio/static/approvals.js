// How the studio words an approval's decision: who made it (the `decidedBy` the daemon records
// with each approval and its `approval.decided` / `approval.refused` events).

/** Who decided an approval, in words: "uid 1000 (alice) pid 4242 on api.sock",
 * "token GOONDAN_API_TOKEN from 10.0.0.7:50000", "anonymous ... from 127.0.0.1:5". */
export function deciderText(who) {
  if (!who) return "unknown";
  const parts = [];
  if (who.token != null) parts.push(`token ${who.token}`);
  else if (who.anonymous) parts.push("anonymous");
  if (who.uid != null) parts.push(`uid ${who.uid}${who.user ? ` (${who.user})` : ""}`);
  if (who.pid != null) parts.push(`pid ${who.pid}`);
  if (who.via === "unix") parts.push("on api.sock");
  else if (who.address) parts.push(`from ${who.address}`);
  return parts.join(" ") || "unknown";
}
