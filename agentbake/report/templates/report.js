// Routes by the URL's hash:
//   #            the job's overview (two jobs: their comparison)
//   #job/J       job J's overview
//   #rollout/J/I rollout I (row I of job J's table) with its turns, diff and verifier output
function route() {
  const view = document.getElementById("view");
  const crumbs = document.getElementById("crumbs");
  const parts = location.hash.replace(/^#/, "").split("/");
  let content, where;
  const job = Number(parts[1]);
  if (parts[0] === "rollout" && JOBS[job] && JOBS[job].rows[Number(parts[2])]) {
    const i = Number(parts[2]);
    content = rolloutView(job, i);
    where = `${JOBS[job].name} › ${JOBS[job].rows[i].folder}`;
  } else if (parts[0] === "job" && JOBS[job]) {
    content = jobView(job);
    where = JOBS[job].name;
  } else {
    content = JOBS.length > 1 ? compareView() : jobView(0);
    where = JOBS.map((j) => j.name).join(" vs ");
  }
  crumbs.textContent = where;
  view.replaceChildren(...[content].flat(Infinity).filter((c) => c));
  window.scrollTo(0, 0);
  document.body.setAttribute("data-view", parts[0] || "home");
}

window.addEventListener("hashchange", route);
route();
