-- The SQL console's statement as the engine's parser reads it: its canonical text, or a syntax
-- error (more than one statement is one). The statement is a value here: nothing of it runs.
SELECT formatQuery({statement:String})
