"""Glossary: every term the app uses, and the reason behind each rule."""

import streamlit as st

from app import frame, glossary

frame.enter()

st.title("Glossary")
st.caption("The words the pages use, in one place. Every page links here; hover a setting's "
           "question-mark icon for the short form.")

for slug, (term, definition) in sorted(glossary.TERMS.items(), key=lambda t: t[1][0].lower()):
    st.subheader(term, anchor=slug, divider=False)
    st.markdown(definition)

st.header("Why the rules are as they are", anchor="why", divider="gray")
for key, why in glossary.WHY.items():
    st.markdown(f"- **{glossary.WHY_TITLES[key]}** — {why}")
