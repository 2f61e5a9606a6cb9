"""Learn: the guided path, one step per screen (the step is in the URL: ?step=N)."""

import streamlit as st

from app import errors, frame, glossary, lesson, nav, presets, state, widgets

frame.enter()

STEPS = lesson.STEPS
N = len(STEPS)
TITLES = {info.script: info.title for info in nav.PAGES}
ANSWERS = "_learn_answers"  # step -> the option chosen (kept while moving between steps)


def go(step: int) -> None:
    """Button callback: show another step."""
    state.set_values(step=min(max(step, 1), N))


st.title("Learn: guided path")
st.caption(f"{N} steps, one idea each. Answer the question before you look at the result, "
           "then press **Try this** to see the idea on a real tensor in the app's pages.")

n = widgets.select("Step", list(range(1, N + 1)), "step", 1, kind="segmented",
                   format_func=lambda i: f"{i} · {STEPS[i - 1].title.split(':')[0]}")
step = STEPS[n - 1]
st.progress(n / N, text=f"Step {n} of {N}")
st.header(step.title, divider="gray")

answers = st.session_state.setdefault(ANSWERS, {})
key = f"learn_q{n}"
if key not in st.session_state and answers.get(n) in step.options:
    st.session_state[key] = answers[n]  # Streamlit forgot it while off screen
left, right = st.columns([6, 5], gap="large")
with right:  # the question first: it is asked before anything that answers it is shown
    with st.container(border=True):
        st.markdown("##### Predict first")
        choice = st.radio(step.question, step.options, index=None, key=key)
        answers[n] = choice
        if choice is None:
            st.caption("Choose an answer to see what qcore computes, the rule and why, and a "
                       "page to try it on.")
        else:
            with st.spinner("qcore computes the answer (a kernel's first use on this machine "
                            "compiles it, once)…", show_time=True):
                answer = errors.require(step.answer, what="Computing the answer")
            right_one = step.options[answer.correct]
            if choice == right_one:
                st.success(f"**Right: {right_one}.** {answer.explanation}",
                           icon=":material/check_circle:")
            else:
                st.error(f"**Not quite — it is {right_one}.** {answer.explanation}",
                         icon=":material/lightbulb:")
            st.info(f"**Why?** {step.why}", icon=":material/help:")
with left:
    st.markdown(step.idea)
    if not step.formula_after:
        st.latex(step.formula)
    if choice is not None and (step.rule or step.formula_after):
        with st.container(border=True):
            st.markdown("##### The rule")
            if step.rule:
                st.markdown(step.rule)
            if step.formula_after:
                st.latex(step.formula)
    if step.terms and choice is not None:  # a term's name can be the answer (saturate)
        st.caption("Words: " + " · ".join(glossary.link(t) for t in step.terms))
    if step.refs:
        st.markdown("**Look it up:**")
        with st.container(horizontal=True, gap="small"):  # each link as wide as its title
            for script in step.refs:
                st.page_link(script, label=TITLES.get(script, script),
                             icon=":material/menu_book:", width="content")
with right, st.container(border=True):
    st.markdown("##### Try this")
    if choice is None:  # its text shows what to look for, often the answer itself
        st.caption(f"After your prediction: **{TITLES.get(step.try_page, step.try_page)}** "
                   "on a real tensor.")
    else:
        st.markdown(step.try_text)
        st.caption(f"Opens **{TITLES.get(step.try_page, step.try_page)}** with "
                   f"{lesson.describe_settings(step.try_settings)}.")
        if st.button("Try this", key=f"learn_try{n}", type="primary",
                     icon=":material/arrow_forward:"):
            if step.preset:
                presets.apply(presets.LAB, step.preset)
            else:
                state.set_values(**step.try_settings)
            st.switch_page(step.try_page)

prev, _, nxt = st.columns([1, 3, 1])
prev.button("Previous step", key="learn_prev", on_click=go, args=(n - 1,), disabled=n == 1,
            icon=":material/arrow_back:", width="stretch")
nxt.button("Next step", key="learn_next", on_click=go, args=(n + 1,), disabled=n == N,
           icon=":material/arrow_forward:", width="stretch")
if n == N:
    st.success("That is the path. Every page of the app is in the sidebar; the "
               "[Glossary](/glossary) holds the words.", icon=":material/flag:")
